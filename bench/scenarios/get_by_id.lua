package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/pets/" .. common.random_id(), {["Authorization"] = "Bearer " .. common.token})
end
