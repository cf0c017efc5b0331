-- wrk script: limitador's HTTP API, POST /check_and_report, as check.lua
-- drives weir's POST /v1/check: one of KEYS user ids at random (default
-- 100,000) in namespace NAMESPACE (default "bench"; bench/syscalls.sh's
-- limits deny "bench-deny"). Loopback only, e.g.
--   wrk -t1 -c64 -d5s -s bench/wrk/limitador-check.lua http://127.0.0.1:18201
local namespace = os.getenv("NAMESPACE") or "bench"
local keys = tonumber(os.getenv("KEYS") or "100000")
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  local body = string.format('{"namespace":"%s","values":{"user_id":"k%d"},"delta":1}',
    namespace, math.random(0, keys - 1))
  return wrk.format(nil, "/check_and_report", nil, body)
end
