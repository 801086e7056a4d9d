-- The bare app's single-row insert (bench/ceiling.py), with the same bodies as create.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("POST", "/pets", {["Content-Type"] = "application/json"}, common.body())
end
