-- GET of many certificates' public links (LINKS_FILE, one path a line) in turn, in the form ACCEPT asks for: each
-- wrk thread starts at its own place and goes round, so that a link comes again only after every other has.
local links = {}
for line in io.lines(os.getenv("LINKS_FILE")) do
  links[#links + 1] = line
end
local accept = os.getenv("ACCEPT") or "application/json"
local threads = tonumber(os.getenv("THREADS") or "1")
local counter = 0
setup = function(thread)
  thread:set("start", counter * math.floor(#links / threads))
  counter = counter + 1
end
local next_index = nil
request = function()
  next_index = ((next_index or start or 0) % #links) + 1
  return wrk.format("GET", links[next_index], {["Accept"] = accept})
end
