-- A pet's vaccinations, newest first, as its owner: the web front end's call, over random vaccinated pets.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  local path = "/v1/pet-vaccination?order=desc&sort=appliedAt&petId=" .. common.random_vaccinated_pet()
  return wrk.format("GET", path, common.auth)
end
