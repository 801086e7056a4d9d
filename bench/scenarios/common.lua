-- Shared by the scenarios: the bearer token and the seeded ids, from the environment.
local common = {}
common.token = os.getenv("TOKEN")
common.ids = {}
for line in io.lines(os.getenv("IDS_FILE")) do
  common.ids[#common.ids + 1] = line
end
function common.random_id()
  return common.ids[math.random(#common.ids)]
end
common.types = {"Dog", "Cat", "Capybara", "Other"}
function common.body()
  return string.format('{"name":"bench %d","petType":"%s"}', math.random(1000000), common.types[math.random(4)])
end
return common
