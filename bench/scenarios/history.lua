-- The history of a random seeded pet, page 1, as its owner (each seeded pet has its "created" change).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/pets/" .. common.random_id() .. "/history", common.auth)
end
