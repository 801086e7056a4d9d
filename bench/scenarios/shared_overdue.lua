-- A clinic's overdue list (bench/shares.py): the shared pets' vaccinations due before now, longest overdue first,
-- as a vet whose token (VET_TOKEN) holds the clinic's group.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local vet = {["Authorization"] = "Bearer " .. os.getenv("VET_TOKEN")}
request = function()
  return wrk.format("GET", "/v1/pet-vaccination?access=shared&sort=dueAt&pageSize=20&dueTo=" .. common.now(), vet)
end
