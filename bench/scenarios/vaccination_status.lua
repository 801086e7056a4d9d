-- A pet's vaccination status (bench/due.py): GET /v1/pets/{id}/vaccination-status of a random vaccinated pet
-- (VACCINATED_FILE), as an admin (ADMIN_TOKEN).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/pets/" .. common.random_vaccinated_pet() .. "/vaccination-status", common.admin)
end
