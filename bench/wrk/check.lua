-- wrk script: POST /v1/check with one of KEYS caller keys at random (default
-- 100,000) on route ROUTE (default "POST /bench"; "bench-deny" is denied by
-- bench/requests/rules.toml). Loopback only, e.g.
--   wrk -t1 -c64 -d5s -s bench/wrk/check.lua http://127.0.0.1:18080
local route = os.getenv("ROUTE") or "POST /bench"
local keys = tonumber(os.getenv("KEYS") or "100000")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  local body = string.format('{"key":"k%d","route":"%s","cost":1}', math.random(0, keys - 1), route)
  return wrk.format(nil, "/v1/check", nil, body)
end
