package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("PUT", "/v1/pets/" .. common.random_id(),
    {["Authorization"] = "Bearer " .. common.token, ["Content-Type"] = "application/json"}, common.body())
end
