-- A grantee's list of the pets shared with them, page 1 (bench/shares.py): VET_TOKEN is a vet's token whose
-- groups hold the clinic the seeded shares name.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local vet = {["Authorization"] = "Bearer " .. os.getenv("VET_TOKEN")}
request = function()
  return wrk.format("GET", "/v1/pets?access=shared&pageSize=20", vet)
end
