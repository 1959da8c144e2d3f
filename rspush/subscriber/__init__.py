"""rs-subscribe, the Destination agent (docs/subscriber.md): discovery, baseline, push with
polling and archive fallback, audit."""
