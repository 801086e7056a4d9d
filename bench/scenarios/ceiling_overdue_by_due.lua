-- The bare app's overdue list by due date (bench/ceiling.py).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/vaccinations/overdue-by-due/" .. common.now_ms())
end
