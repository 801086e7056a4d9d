-- DELETE: each thread deletes its own ids, each once (after the last one, 404s are counted as non-2xx).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
setup = common.setup
local mine, position
request = function()
  mine = mine or common.partition()
  position = (position or 0) + 1
  return wrk.format("DELETE", "/v1/pets/" .. common.ids[mine[(position - 1) % #mine + 1]], common.auth)
end
