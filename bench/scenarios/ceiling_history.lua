-- The bare app's history of a pet (bench/ceiling.py): the service's statements, with the same random ids.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/history/" .. common.random_id())
end
