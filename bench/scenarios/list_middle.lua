-- The middle page of the caller's records (MIDDLE_PAGE), defaults otherwise.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local path = "/v1/pets?pageIndex=" .. os.getenv("MIDDLE_PAGE")
request = function()
  return wrk.format("GET", path, common.auth)
end
