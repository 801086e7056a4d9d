-- The admin's overdue list, longest overdue first (sort=dueAt), page 1 of 20 records (as the ceiling's).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/pet-vaccination?sort=dueAt&pageSize=20&dueTo=" .. common.now(), common.admin)
end
