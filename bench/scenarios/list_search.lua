-- The caller's pets whose name holds a four-digit number (the seeded names are "<word> <index> <letter>"): what a
-- person types to find one pet among their records. Over 250,000 pets a number matches about 100 to 160 of them.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  local path = "/v1/pets?search=" .. tostring(math.random(1000, 9999))
  return wrk.format("GET", path, {["Authorization"] = "Bearer " .. common.token})
end
