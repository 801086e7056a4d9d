-- A vaccine of the catalogue by id, as an owner (every caller may read the catalogue).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/vaccines/" .. common.random_vaccine(), common.auth)
end
