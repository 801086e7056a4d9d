-- A vet's list of pets with no `access` filter (bench/shares.py): their own and every pet shared with them, page 1;
-- VET_TOKEN is a vet's token whose groups hold the clinic the seeded shares name.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local vet = {["Authorization"] = "Bearer " .. os.getenv("VET_TOKEN")}
request = function()
  return wrk.format("GET", "/v1/pets?pageSize=20", vet)
end
