-- The catalogue's first page with the defaults, as an owner.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/vaccines", common.auth)
end
