-- A vet's overdue list with no `access` filter (bench/shares.py): the vaccinations due before now of their own pets
-- and of every pet shared with them, longest overdue first, as a vet whose token (VET_TOKEN) holds the clinic's group.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local vet = {["Authorization"] = "Bearer " .. os.getenv("VET_TOKEN")}
request = function()
  return wrk.format("GET", "/v1/pet-vaccination?sort=dueAt&pageSize=20&dueTo=" .. common.now(), vet)
end
