-- The bare app's primary-key lookup (bench/ceiling.py), with the same random ids.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/pets/" .. common.random_id())
end
