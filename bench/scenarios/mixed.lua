-- 80 % reads by id, 20 % creates.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  local headers = {["Authorization"] = "Bearer " .. common.token, ["Content-Type"] = "application/json"}
  if math.random(10) <= 8 then
    return wrk.format("GET", "/v1/pets/" .. common.random_id(), headers)
  end
  return wrk.format("POST", "/v1/pets", headers, common.body())
end
