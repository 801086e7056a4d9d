-- The bare app's create (bench/ceiling.py: the pet, its change and the kept counts, as the store writes them),
-- with the same bodies as create.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("POST", "/pets", {["Content-Type"] = "application/json"}, common.body())
end
