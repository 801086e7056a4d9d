-- The bare app's create with group commit (bench/ceiling.py, SQLite), with the same bodies as create.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("POST", "/pets/grouped", {["Content-Type"] = "application/json"}, common.body())
end
