"""Every Lua script the service runs in Redis, each headed by what its KEYS and ARGV hold.

Scripts are for small, atomic decisions; the state arrays never pass through Lua (see
:mod:`service.stores.redis`), a log entry does.  All of one model's keys share the hash tag
``{<model id>}`` (:mod:`service.stores.keys`), so every script runs unchanged on a Redis Cluster.
"""

# ---------------------------------------------------------------------------- model store
CREATE_SCRIPT = """
-- KEYS[1] config  KEYS[2] version  KEYS[3] meta  KEYS[4] state  KEYS[5] layout
-- KEYS[6..] the model's other keys (seen, expired, pending, deadlines), wiped on replace
-- ARGV[1] '1' to replace an existing model, '0' to refuse, or the incarnation the model
--         must have to be replaced (a reset: never re-creates a model deleted meanwhile)
-- ARGV[2] config JSON   ARGV[3] incarnation   ARGV[4] number of state fields, then (field,
-- raw bytes) pairs, then the number of layouts and (array name, layout) pairs
-- Returns 1 (the new version), -1 if the model exists and ARGV[1] is '0', -2 if ARGV[1] is
-- an incarnation and there is no model, -3 if the model has another incarnation.
if ARGV[1] == '0' then
  if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
elseif ARGV[1] ~= '1' then
  local current = redis.call('HGET', KEYS[3], 'incarnation')
  if not current or redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
  if current ~= ARGV[1] then return -3 end
end
redis.call('DEL', unpack(KEYS))
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], 1)
redis.call('HSET', KEYS[3], 'incarnation', ARGV[3])
local position = 4
for _, key in ipairs({KEYS[4], KEYS[5]}) do
  local count = tonumber(ARGV[position])
  for i = 0, count - 1 do
    redis.call('HSET', key, ARGV[position + 1 + 2 * i], ARGV[position + 2 + 2 * i])
  end
  position = position + 1 + 2 * count
end
return 1
"""

LOG_APPEND_SCRIPT = """
-- KEYS[1] version  KEYS[2] meta  KEYS[3] log  KEYS[4] seen  KEYS[5] expired
-- KEYS[6] pending  KEYS[7] deadlines  KEYS[8] lease  KEYS[9] queue  KEYS[10] turn
-- ARGV[1] expected version  ARGV[2] incarnation  ARGV[3] the entry's bytes  ARGV[4] now
-- ARGV[5] the ids' expiry  ARGV[6] most ids remembered of each kind (0: no bound)
-- ARGV[7] fence: the lease holder ('' without one)  ARGV[8] fence: the lease generation
-- ARGV[9] the writing process (its write turn: service.engine.turns)
-- then four lists, each its length first: learned ids, expired ids, consumed pending ids,
-- meta (name, value) pairs.
-- Only when the model is at the expected version and incarnation (and the fence holds the
-- lease): the version incremented, the entry appended as stream id '<version>-0', the ids
-- remembered (those past their expiry forgotten, then the oldest beyond the bound), the
-- pending records consumed, the meta fields written.  Returns {1, new version}; {-1} when
-- there is no model; {-2, version, incarnation} when stale; {-3, holder, generation} when
-- the fence does not hold the lease; {-4, holder} when another process holds the model's
-- write turn (the caller's own turn ends with its append).  'log:saved' is set to the
-- version if absent.
local version = redis.call('GET', KEYS[1])
if not version then return {-1} end
local incarnation = redis.call('HGET', KEYS[2], 'incarnation') or ''
if tonumber(version) ~= tonumber(ARGV[1]) or incarnation ~= ARGV[2] then
  return {-2, version, incarnation}
end
if ARGV[7] ~= '' then
  local holder = redis.call('GET', KEYS[8]) or ''
  local generation = redis.call('HGET', KEYS[9], 'lease_generation') or '0'
  if holder ~= ARGV[7] or generation ~= ARGV[8] then return {-3, holder, generation} end
end
local turn = redis.call('GET', KEYS[10])
if turn and turn ~= ARGV[9] then return {-4, turn} end
if turn then redis.call('DEL', KEYS[10]) end
local position = 10
-- a list's items in slices of 500 (unpack's limit is ~8,000 values)
local function slices(handle)
  local count = tonumber(ARGV[position])
  for first = position + 1, position + count, 500 do
    handle(first, math.min(first + 499, position + count))
  end
  position = position + count + 1
  return count
end
for _, key in ipairs({KEYS[4], KEYS[5]}) do
  local count = slices(function(first, last)
    local scored = {}
    for i = first, last do
      scored[#scored + 1] = ARGV[5]
      scored[#scored + 1] = ARGV[i]
    end
    redis.call('ZADD', key, unpack(scored))
  end)
  if count > 0 then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[4])
    local bound = tonumber(ARGV[6])
    if bound > 0 then redis.call('ZREMRANGEBYRANK', key, 0, -bound - 1) end
  end
end
slices(function(first, last)
  redis.call('HDEL', KEYS[6], unpack(ARGV, first, last))
  redis.call('ZREM', KEYS[7], unpack(ARGV, first, last))
end)
slices(function(first, last) redis.call('HSET', KEYS[2], unpack(ARGV, first, last)) end)
-- a model whose state was written at every version (no log yet) is checkpointed at its head
redis.call('HSETNX', KEYS[2], 'log:saved', version)
local new = redis.call('INCR', KEYS[1])
local id = string.format('%d-0', new)
local added = redis.pcall('XADD', KEYS[3], id, 'e', ARGV[3])
if type(added) == 'table' and added.err then
  -- the log holds entries past the version: a version key that went back (a loss an
  -- operator acknowledged); that history is gone, the log restarts from the version
  local kept = redis.call('XRANGE', KEYS[3], '-', '(' .. id)
  redis.call('DEL', KEYS[3])
  for _, item in ipairs(kept) do redis.call('XADD', KEYS[3], item[1], unpack(item[2])) end
  redis.call('XADD', KEYS[3], id, 'e', ARGV[3])
end
return {1, new}
"""

CHECKPOINT_SCRIPT = """
-- KEYS[1] version  KEYS[2] meta  KEYS[3] state  KEYS[4] layout  KEYS[5] log
-- KEYS[6] the staged state  KEYS[7] the staged layout (aucs:{m}:checkpoint:<token>:...)
-- ARGV[1] incarnation  ARGV[2] the version the staged state is the state of
-- When the model is of that incarnation and the version is after its checkpoint and not
-- after its head: the staged hashes replace the state and layout, 'log:saved' is the
-- version, and the log's entries up to it are trimmed.  Otherwise the staged hashes are
-- deleted.  Returns 1 when installed, 0 when not.
local head = tonumber(redis.call('GET', KEYS[1]) or '0')
local saved = tonumber(redis.call('HGET', KEYS[2], 'log:saved') or head)
local version = tonumber(ARGV[2])
if head == 0 or redis.call('HGET', KEYS[2], 'incarnation') ~= ARGV[1]
    or version <= saved or version > head then
  redis.call('DEL', KEYS[6], KEYS[7])
  return 0
end
redis.call('DEL', KEYS[3], KEYS[4])
for i, target in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('EXISTS', KEYS[5 + i]) == 1 then
    redis.call('RENAME', KEYS[5 + i], target)
    redis.call('PERSIST', target)
  end
end
redis.call('HSET', KEYS[2], 'log:saved', version)
redis.call('XTRIM', KEYS[5], 'MINID', string.format('%d-0', version + 1))
return 1
"""

PENDING_SCRIPT = """
-- KEYS[1] aucs:{m}:config   KEYS[2] aucs:{m}:pending   KEYS[3] aucs:{m}:deadlines
-- KEYS[4] aucs:{m}:meta
-- ARGV[1] deadline (unix s)   ARGV[2] most records kept (0: no bound)
-- ARGV[3] the incarnation that scored ('' for any), then (event id, record) pairs
-- Keeps scored events' records until the deadline.  Returns the number kept, -2 (no model),
-- -3 (the model would keep more than ARGV[2] records) or -4 (the model is another
-- incarnation now); nothing is kept but for the number.
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
if ARGV[3] ~= '' and redis.call('HGET', KEYS[4], 'incarnation') ~= ARGV[3] then return -4 end
local bound = tonumber(ARGV[2])
if bound > 0 then
  local kept = redis.call('HLEN', KEYS[2])
  for i = 4, #ARGV, 2 do
    if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 0 then kept = kept + 1 end
  end
  if kept > bound then return -3 end
end
for i = 4, #ARGV, 2 do
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  redis.call('ZADD', KEYS[3], ARGV[1], ARGV[i])
end
return (#ARGV - 3) / 2
"""

DELETE_SCRIPT = """
-- KEYS: every key of one model (aucs:{m}:...), KEYS[1] being its config
-- Returns 1 when deleted, 0 when the model did not exist.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('DEL', unpack(KEYS))
return 1
"""

# ---------------------------------------------------------------------------- lost data
MARKER_SCRIPT = """
-- KEYS[1] aucs:{epoch-N}:marker   ARGV[1] the epoch id of a marker written now
-- ARGV[2] '1': an operator acknowledged a loss: a new epoch ARGV[1], its clock at Redis's time
-- or later, marked ``acknowledged`` so that every process adopts it.  Else reads the marker
-- and moves its clock to Redis's time (ms) if that is later; writes one if there is none.
-- Returns {epoch, clock before, created (0/1), acknowledged (0/1), clock after}.
local now = redis.call('TIME')
local milliseconds = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local clock = tonumber(redis.call('HGET', KEYS[1], 'clock') or '0')
local after = math.max(clock, milliseconds)
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'clock', after, 'acknowledged', 1)
  return {ARGV[1], after, 0, 1, after}
end
local epoch = redis.call('HGET', KEYS[1], 'epoch')
if not epoch then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'clock', milliseconds)
  return {ARGV[1], milliseconds, 1, 0, milliseconds}
end
if after > clock then redis.call('HSET', KEYS[1], 'clock', after) end
return {epoch, clock, 0, redis.call('HEXISTS', KEYS[1], 'acknowledged'), after}
"""

# ---------------------------------------------------------------------------- queue mode
APPEND_SCRIPT = """
-- KEYS[1] aucs:{m}:config  KEYS[2] aucs:{m}:meta  KEYS[3] aucs:{m}:stream  KEYS[4] aucs:{m}:queue
-- KEYS[5] aucs:{m}:append:<token>: the reply to this append, once made
-- ARGV[1] incarnation the batch was validated against   ARGV[2] most events in the backlog
-- ARGV[3] consumer group name   ARGV[4] events in this request   ARGV[5] number of entries
-- ARGV[6] milliseconds the reply is kept
-- then per entry: the number of its field/value arguments, then those arguments.
-- Returns {1, backlog after the append, stream ids...}; -2 when there is no model; -3 when the
-- model was re-created since the batch was validated; {-1, backlog} when the backlog is full.
-- Sent again with the same token (its reply was lost), it returns the first reply and appends
-- nothing.
if redis.call('EXISTS', KEYS[1]) == 0 then return -2 end
if redis.call('HGET', KEYS[2], 'incarnation') ~= ARGV[1] then return -3 end
local made = redis.call('GET', KEYS[5])
if made then
  local reply = {}
  for word in string.gmatch(made, '%S+') do reply[#reply + 1] = word end
  reply[1] = tonumber(reply[1])
  reply[2] = tonumber(reply[2])
  return reply
end
local appended = tonumber(redis.call('HGET', KEYS[4], 'events') or '0')
local applied = tonumber(redis.call('HGET', KEYS[2], 'queue:events') or '0')
local backlog = appended - applied
if backlog + tonumber(ARGV[4]) > tonumber(ARGV[2]) then return {-1, backlog} end
local fresh = redis.call('EXISTS', KEYS[3]) == 0
local reply = {1, backlog + tonumber(ARGV[4])}
local position = 7
for entry = 1, tonumber(ARGV[5]) do
  local count = tonumber(ARGV[position])
  local fields = {}
  for j = 1, count do fields[j] = ARGV[position + j] end
  reply[entry + 2] = redis.call('XADD', KEYS[3], '*', unpack(fields))
  position = position + count + 1
end
if fresh then redis.pcall('XGROUP', 'CREATE', KEYS[3], ARGV[3], '0') end
redis.call('HINCRBY', KEYS[4], 'events', ARGV[4])
redis.call('HINCRBY', KEYS[4], 'entries', ARGV[5])
redis.call('SET', KEYS[5], table.concat(reply, ' '), 'PX', ARGV[6])
return reply
"""

ENSURE_GROUP_SCRIPT = """
-- KEYS[1] aucs:{m}:config   KEYS[2] aucs:{m}:stream   ARGV[1] consumer group name
-- Creates the stream and its consumer group (reading from the start) if they are missing.
-- Returns 1 when the model exists, 0 when it does not (nothing is created then).
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[1], '0', 'MKSTREAM')
return 1
"""

LEASE_SCRIPT = """
-- KEYS[1] aucs:{m}:lease   KEYS[2] aucs:{m}:config   KEYS[3] aucs:{m}:queue
-- ARGV[1] worker name   ARGV[2] lease duration (milliseconds)
-- ARGV[3] the lease generation the caller holds ('0' when it holds none)
-- The generation (field 'lease_generation' of the queue hash) grows by one at each taking:
-- with the name it is the fencing token a worker's commits are checked against.
-- Returns {1, generation} when the caller's own lease is renewed, {2, generation} when the
-- lease was free (or held under the caller's name at another generation) and is now taken,
-- {0, 0} when another worker holds it or there is no model.
if redis.call('EXISTS', KEYS[2]) == 0 then return {0, 0} end
local holder = redis.call('GET', KEYS[1])
local generation = redis.call('HGET', KEYS[3], 'lease_generation') or '0'
if holder == ARGV[1] and generation == ARGV[3] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(generation)}
end
if holder and holder ~= ARGV[1] then return {0, 0} end
generation = redis.call('HINCRBY', KEYS[3], 'lease_generation', 1)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {2, generation}
"""

HEARTBEAT_SCRIPT = """
-- KEYS[1] aucs:workers   ARGV[1] worker name   ARGV[2] heartbeat lifetime (milliseconds)
-- Marks the worker alive until now + lifetime (Redis's clock), forgets expired workers.
-- Returns the number of live workers.
local now = redis.call('TIME')
local milliseconds = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], milliseconds + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', milliseconds)
return redis.call('ZCARD', KEYS[1])
"""

RELEASE_SCRIPT = """
-- KEYS[1] aucs:{m}:lease   KEYS[2] aucs:{m}:queue   ARGV[1] worker name   ARGV[2] generation
-- Returns 1 when the caller held the lease at that generation (now released), else 0.
if redis.call('GET', KEYS[1]) == ARGV[1]
    and redis.call('HGET', KEYS[2], 'lease_generation') == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""

TURN_SCRIPT = """
-- KEYS[1] aucs:{m}:turn   ARGV[1] the process   ARGV[2] how long (milliseconds)
-- A process whose append was stale takes the model's write turn (service.engine.turns): the
-- other processes' appends are refused until its own append ends it, or it lapses.  Returns
-- 1 when the caller holds the turn (taken, or its own renewed), 0 when another process does.
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

TURN_RELEASE_SCRIPT = """
-- KEYS[1] aucs:{m}:turn   ARGV[1] the process: its turn ended without an append
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""
