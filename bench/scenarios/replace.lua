-- PUT with the record's current If-Match: each thread walks its own ids, and keeps the ETag each
-- 200 returns, so that every replace is a real conditional write that succeeds.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
setup = common.setup
local mine, position
request = function()
  mine = mine or common.partition()
  position = (position or 0) % #mine + 1
  local index = mine[position]
  local headers = {["Authorization"] = common.json["Authorization"], ["Content-Type"] = "application/json",
                   ["If-Match"] = common.etags[index]}
  return wrk.format("PUT", "/v1/pets/" .. common.ids[index], headers, common.body())
end
response = function(status, headers, body)
  if status == 200 then
    local index = common.index[body:match('"id":"([^"]+)"')]
    if index then
      common.etags[index] = headers["etag"] or headers["ETag"]
    end
  end
end
