-- A vaccination's get by id (bench/due.py): GET /v1/pet-vaccination/{DOSE_ID} as the owner (TOKEN).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local path = "/v1/pet-vaccination/" .. os.getenv("DOSE_ID")
request = function()
  return wrk.format("GET", path, common.auth)
end
