-- Shared by the scenarios: the bearer token and the seeded ids with their ETags, from the environment.
-- IDS_FILE holds one "id etag" per line; THREADS is wrk's thread count, for per-thread partitions.
local common = {}
common.token = os.getenv("TOKEN")
common.ids = {}
common.etags = {}
common.index = {}
for line in io.lines(os.getenv("IDS_FILE")) do
  local id, etag = line:match("^(%S+) (.+)$")
  common.ids[#common.ids + 1] = id
  common.etags[#common.ids] = etag
  common.index[id] = #common.ids
end
function common.random_id()
  return common.ids[math.random(#common.ids)]
end
common.types = {"Dog", "Cat", "Capybara", "Other"}
function common.body()
  return string.format('{"name":"bench %d","petType":"%s"}', math.random(1000000), common.types[math.random(4)])
end
common.auth = {["Authorization"] = "Bearer " .. (common.token or "")}
common.json = {["Authorization"] = "Bearer " .. (common.token or ""), ["Content-Type"] = "application/json"}

-- The indexes of the ids this wrk thread owns, so that threads never write the same record at once.
-- `thread_index` is set on each thread by the scripts' setup().
function common.partition()
  local threads = tonumber(os.getenv("THREADS") or "1")
  local mine = {}
  for i = 1, #common.ids do
    if i % threads == (thread_index or 0) then
      mine[#mine + 1] = i
    end
  end
  return mine
end

local next_thread = 0
function common.setup(thread)
  thread:set("thread_index", next_thread)
  next_thread = next_thread + 1
end
return common
