-- The middle page (MIDDLE_PAGE) of the caller's records in pages of 20 (bench/run.py's PAGE_SIZE), defaults otherwise.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local path = "/v1/pets?pageSize=20&pageIndex=" .. os.getenv("MIDDLE_PAGE")
request = function()
  return wrk.format("GET", path, common.auth)
end
