-- The publish lease and the publication of snapshots under it: lb_lease, lb_publish.
local publish = {}

--[[ lb_lease: take, renew or release a lease held under a unique owner token.
Renewal must check the holder and extend in one step: a plain SET XX would steal a lease that
expired and was taken by another replica in between.
Input:  KEYS[1] lease key; ARGV[1] owner token, ARGV[2] ttl_ms, ARGV[3] 'hold' or 'release'
Output: 1 if the caller holds the lease after the call, else 0
]]
function publish.lb_lease(keys, args)
  local owner, ttl = args[1], valid.parse_uint(args[2], 9)
  if not owner or owner == '' or not ttl or ttl < 1 then
    return refuse('bad_request', 'lease needs an owner and a ttl in ms')
  end
  local holder = redis.call('GET', keys[1])
  if args[3] == 'release' then
    if holder == owner then
      redis.call('DEL', keys[1])
    end
    return 0
  end
  if holder == owner then
    redis.call('PEXPIRE', keys[1], ttl)
    return 1
  end
  if holder then
    return 0
  end
  redis.call('SET', keys[1], owner, 'PX', ttl)
  return 1
end

--[[ lb_publish: publish snapshots and store them as the latest, only while holding the lease.
The lease check and the writes are one atomic call: a publisher that stalled past its lease (and
was replaced) publishes nothing, so two replicas never publish in the same tick.
Input:  KEYS[1] lease, KEYS[2] published record (hash), KEYS[3..] each board's latest snapshot
        ARGV    owner, latest_ttl_s, then per board: channel, record field, record value, snapshot
Output: 1 published; 0 not the lease holder (nothing written)
]]
publish.PUBLISH_KEYS, publish.PUBLISH_ARGS, publish.PUBLISH_FIELDS = 2, 2, 4

function publish.lb_publish(keys, args)
  local owner, ttl = args[1], valid.parse_uint(args[2], 9)
  if not ttl or ttl < 1 or #args ~= publish.PUBLISH_ARGS + publish.PUBLISH_FIELDS * (#keys - publish.PUBLISH_KEYS) then
    return refuse('bad_request', 'malformed publish')
  end
  if redis.call('GET', keys[1]) ~= owner then
    return 0
  end
  local pos = publish.PUBLISH_ARGS + 1
  for b = publish.PUBLISH_KEYS + 1, #keys do
    local channel, field, value, snapshot = unpack(args, pos, pos + publish.PUBLISH_FIELDS - 1)
    redis.call('SPUBLISH', channel, snapshot)
    redis.call('SET', keys[b], snapshot, 'EX', ttl)
    redis.call('HSET', keys[2], field, value)
    pos = pos + publish.PUBLISH_FIELDS
  end
  return 1
end
