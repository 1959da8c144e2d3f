"""The rspush hub (ingest, Redis streams, push, materialised pull documents): see issue 3."""
