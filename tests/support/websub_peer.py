"""A real WebSub subscriber from the package index (flask-websub 0.4.1), in its own process:
``python -m tests.support.websub_peer DIR`` serves a Flask app on 127.0.0.1 (a free port,
printed as ``listening on http://127.0.0.1:PORT``) whose subscriber keeps its state in
SQLite files under DIR. The test drives it over HTTP:

- ``POST /control/subscribe`` (form ``url``, optional ``lease_seconds``): discovery of the
  hub and topic from ``url``'s Link header (``flask_websub.subscriber.discover``), then
  ``subscribe``; answers the callback id;
- ``POST /control/unsubscribe`` (form ``callback_id``);
- ``GET /control/events``: what the subscriber's handlers saw, as JSON (notifications with
  their bodies, successes, errors).

Nothing here imports rspush: it is the other side of the wire.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from flask import Flask, jsonify, request
from flask_websub.subscriber import (
    SQLite3SubscriberStorage,
    SQLite3TempSubscriberStorage,
    Subscriber,
    discover,
)
from werkzeug.serving import make_server


def build(directory: Path) -> tuple[Flask, dict[str, list[Any]]]:
    app = Flask("websub-peer")
    subscriber = Subscriber(
        SQLite3SubscriberStorage(str(directory / "subscriptions.sqlite")),
        SQLite3TempSubscriberStorage(str(directory / "requests.sqlite")),
    )
    app.register_blueprint(subscriber.build_blueprint(url_prefix="/callbacks"))
    events: dict[str, list[Any]] = {"notifications": [], "successes": [], "errors": []}
    lock = threading.Lock()

    @subscriber.add_listener
    def on_notification(topic: str, callback_id: str, body: bytes) -> None:
        with lock:
            events["notifications"].append(
                {"topic": topic, "callback_id": callback_id, "body": body.decode()}
            )

    @subscriber.add_success_handler
    def on_success(topic: str, callback_id: str, mode: str) -> None:
        with lock:
            events["successes"].append({"topic": topic, "callback_id": callback_id, "mode": mode})

    @subscriber.add_error_handler
    def on_error(topic: str, callback_id: str, reason: str) -> None:
        with lock:
            events["errors"].append({"topic": topic, "callback_id": callback_id, "reason": reason})

    @app.post("/control/subscribe")
    def subscribe() -> Any:
        found = discover(request.form["url"])
        options: dict[str, Any] = dict(found)
        if "lease_seconds" in request.form:
            options["lease_seconds"] = int(request.form["lease_seconds"])
        return jsonify({"callback_id": subscriber.subscribe(**options), **found})

    @app.post("/control/unsubscribe")
    def unsubscribe() -> Any:
        subscriber.unsubscribe(request.form["callback_id"])
        return jsonify({})

    @app.get("/control/events")
    def get_events() -> Any:
        with lock:
            return jsonify(events)

    return app, events


def main() -> None:
    directory = Path(sys.argv[1])
    app, _ = build(directory)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    app.config["SERVER_NAME"] = f"127.0.0.1:{server.port}"
    print(f"listening on http://127.0.0.1:{server.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
