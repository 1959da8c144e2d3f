-- Included at the top of the scripts that write a request's step (append, seed): the checks
-- that come before any write, the same in both.
--
-- A bridge writes only from the checkpoint it read: a second runner of the same bridge (a
-- lease that expired mid-step) cannot write again ('stale'). An idempotency key names one
-- request: a retry gets the first receipt ('dup'), the same key with another body is
-- refused ('reused'). nil: go on.
local function refused_step(has_checkpoint, checkpoint, checkpoint_expected, has_idem, idem,
                            body_sha256)
  if has_checkpoint and (redis.call('GET', checkpoint) or '') ~= checkpoint_expected then
    return {'stale'}
  end
  if has_idem then
    local seen = redis.call('GET', idem)
    if seen then
      local stored = cjson.decode(seen).body_sha256
      if stored and stored ~= body_sha256 then return {'reused'} end
      return {'dup', seen}
    end
  end
  return nil
end
