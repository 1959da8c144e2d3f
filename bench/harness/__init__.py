"""What every benchmark shares, so that each ``bench_*.py`` holds only its phases and its CLI.

- :mod:`bench.harness.system`: processes and the machine — free ports, fd limit, stopping a
  child, helper processes spoken to in JSON lines, CPU and memory read from /proc, waiting;
- :mod:`bench.harness.hub`: a real hub (``rs-hub serve``, its own process, embedded
  valkey-server) on 127.0.0.1, its metrics, and a poster for its ingest endpoint;
- :mod:`bench.harness.clients`: processes holding many WebSocket push clients;
- :mod:`bench.harness.agent`: a Destination agent run inside the benchmark's process;
- :mod:`bench.harness.results`: logging, percentiles, the command line and checkout measured,
  JSON output.
"""
