package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  local path = "/v1/pets?petType=" .. common.types[math.random(4)] .. "&search=" .. string.char(96 + math.random(8))
  return wrk.format("GET", path, {["Authorization"] = "Bearer " .. common.token})
end
