-- The admin's overdue list, longest overdue first (sort=dueAt).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
request = function()
  return wrk.format("GET", "/v1/pet-vaccination?sort=dueAt&dueTo=" .. common.now(), common.admin)
end
