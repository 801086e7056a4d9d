-- Shared by the scenarios: the bearer tokens and the seeded ids with their ETags, from the environment.
-- IDS_FILE holds one "id etag" per line; VACCINATED_FILE (when set) one id of a pet with vaccinations per
-- line; VACCINES_FILE (when set) one id of a vaccine per line; THREADS is wrk's thread count, for per-thread
-- partitions.
local common = {}
common.token = os.getenv("TOKEN")
common.admin_token = os.getenv("ADMIN_TOKEN")
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
common.vaccinated = {}
if os.getenv("VACCINATED_FILE") then
  for line in io.lines(os.getenv("VACCINATED_FILE")) do
    common.vaccinated[#common.vaccinated + 1] = line
  end
end
function common.random_vaccinated_pet()
  return common.vaccinated[math.random(#common.vaccinated)]
end
common.vaccines = {}
if os.getenv("VACCINES_FILE") then
  for line in io.lines(os.getenv("VACCINES_FILE")) do
    common.vaccines[#common.vaccines + 1] = line
  end
end
function common.random_vaccine()
  return common.vaccines[math.random(#common.vaccines)]
end
-- Now as the web front end sends it (RFC 3339 with milliseconds; Lua's clock has whole seconds), and in epoch ms.
function common.now()
  return os.date("!%Y-%m-%dT%H:%M:%S.000Z")
end
function common.now_ms()
  return os.time() * 1000
end
common.types = {"Dog", "Cat", "Capybara", "Other"}
function common.body()
  return string.format('{"name":"bench %d","petType":"%s"}', math.random(1000000), common.types[math.random(4)])
end
common.auth = {["Authorization"] = "Bearer " .. (common.token or "")}
common.admin = {["Authorization"] = "Bearer " .. (common.admin_token or "")}
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
