-- The bare app's overdue list in the default order (bench/ceiling.py).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/vaccinations/overdue/" .. common.now_ms())
end
