package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("POST", "/v1/pets",
    {["Authorization"] = "Bearer " .. common.token, ["Content-Type"] = "application/json"}, common.body())
end
