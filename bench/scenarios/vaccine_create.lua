-- An admin adds a vaccine to the catalogue.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local headers = {["Authorization"] = common.admin["Authorization"], ["Content-Type"] = "application/json"}
request = function()
  local body = string.format('{"name":"bench vaccine %d","petType":"%s","duration":%d}', math.random(1000000),
    common.types[math.random(4)], 30 * math.random(36))
  return wrk.format("POST", "/v1/vaccines", headers, body)
end
