"""The rspush hub: Sources post changes (:mod:`.app`, :mod:`.service`), kept in Redis streams
(:mod:`.store`), published as ResourceSync documents (:mod:`.documents`) and pushed to
subscribers (:mod:`.push`). Errors: :mod:`.errors`."""
