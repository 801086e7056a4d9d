-- The caller's pets whose name holds an "e": a one-letter search, which no trigram index serves, reads every one
-- of the caller's pets (for its count and its page). Run beside get_by_id (bench/run.py's ALONGSIDE): what a long
-- read costs everyone else's quickest request.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/pets?search=e&pageSize=20", {["Authorization"] = "Bearer " .. common.token})
end
