-- A vaccination's create (bench/due.py): POST /v1/pet-vaccination as the owner (TOKEN) of the body DOSE_BODY, in
-- which "%p" is a random pet of DOSE_PETS_FILE (one id a line) and each "%d" a number of this request's own (a
-- rabies tag is unique in its year).
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local template = os.getenv("DOSE_BODY")
local pets = {}
for line in io.lines(os.getenv("DOSE_PETS_FILE")) do
  pets[#pets + 1] = line
end
local counter = 0
setup = function(thread)
  -- Unique within the run, and from run to run (a second of this day; wrk seeds math.random alike every run).
  thread:set("thread_index", (os.time() % 86400) * 1000 + math.random(1000))
end
request = function()
  counter = counter + 1
  local number = (thread_index or 0) * 100000 + counter
  local body = template:gsub("%%p", pets[math.random(#pets)]):gsub("%%d", string.format("%d", number))
  return wrk.format("POST", "/v1/pet-vaccination", common.json, body)
end
