-- The bare app's list of a pet's vaccinations (bench/ceiling.py), over the same random pets.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/vaccinations/pet/" .. common.random_vaccinated_pet())
end
