"""rs-subscribe, the Destination agent: see issue 5."""
