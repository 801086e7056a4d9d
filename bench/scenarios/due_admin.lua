-- What is due (bench/due.py): page 1 of GET /v1/due with its exact count, as an admin (ADMIN_TOKEN): every living
-- pet's groups whose latest dose is due before now.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/due?pageSize=" .. (os.getenv("DUE_PAGE_SIZE") or "100"), common.admin)
end
