-- The bare app's single-row insert into pets (PostgreSQL: no change, no counts, one commit each), with the same
-- bodies as create.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("POST", "/pets/insert", {["Content-Type"] = "application/json"}, common.body())
end
