-- What is due (bench/due.py): page 1 of GET /v1/due with its exact count, as a vet whose token (VET_TOKEN) holds
-- the clinic's group: the clinic's patients (and the vet's own pets) whose latest dose of a group is due.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local vet = {["Authorization"] = "Bearer " .. os.getenv("VET_TOKEN")}
request = function()
  return wrk.format("GET", "/v1/due?pageSize=" .. (os.getenv("DUE_PAGE_SIZE") or "100"), vet)
end
