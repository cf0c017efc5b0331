-- wrk script: POST /v1/check with one of 100,000 caller keys at random, as
-- weir-bench's HTTP workload does. Loopback only, e.g.
--   wrk -t1 -c64 -d5s -s sim/wrk/check.lua http://127.0.0.1:18080
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

request = function()
  local body = string.format('{"key":"k%d","route":"GET /"}', math.random(0, 99999))
  return wrk.format(nil, "/v1/check", nil, body)
end
