-- wrk script: POST /v1/check with a caller key never sent before on every
-- request (PREFIX, default "n", then the thread and a count), on route
-- ROUTE (default "POST /bench"), each at a cost drawn between COST_MIN and
-- COST_MAX (default 1): a flood of new keys, to fill a rule's table to its
-- ceiling and keep it there. Loopback only, e.g.
--   wrk -t1 -c32 -d60s -s bench/wrk/new-keys.lua http://127.0.0.1:18080
local route = os.getenv("ROUTE") or "POST /bench"
local prefix = os.getenv("PREFIX") or "n"
local cost_min = tonumber(os.getenv("COST_MIN") or "1")
local cost_max = tonumber(os.getenv("COST_MAX") or tostring(cost_min))
local threads = 0
local sent = 0
local me = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

setup = function(thread)
  thread:set("me", threads)
  threads = threads + 1
end

request = function()
  sent = sent + 1
  local cost = math.random(cost_min, cost_max)
  local body = string.format('{"key":"%s%d_%d","route":"%s","cost":%d}', prefix, me, sent, route, cost)
  return wrk.format(nil, "/v1/check", nil, body)
end
