-- The admin's overdue list: everything due before now, page 1 of 20 records (as the ceiling's), the default order (createdAt).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/pet-vaccination?pageSize=20&dueTo=" .. common.now(), common.admin)
end
