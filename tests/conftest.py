"""Session-wide fixtures, visible to every test folder: the spec folder, the Redis-compatible
server and a key prefix per test. They live in :mod:`tests.support`; the folders whose tests
run a hub add the hub fixtures in their own conftest.

``RSPUSH_TIMEOUT_SCALE`` multiplies condition-wait timeouts on slow machines
(:mod:`tests.support.waiting`).
"""

from tests.support.redis import prefix, redis_url
from tests.support.spec import spec_dir

__all__ = ["prefix", "redis_url", "spec_dir"]
