-- The change feed as the owner pages it, 100 changes a page, calling again with the last nextCursor. Each wrk
-- thread follows one cursor from the oldest kept change (its connections ask for the same page until an answer
-- moves it on), and starts over from the oldest when a page comes back empty: it then has every change.
package.path = package.path .. ";" .. debug.getinfo(1).source:match("@?(.*/)") .. "?.lua"
local common = require("common")
local cursor
request = function()
  local path = "/v1/changes?limit=100"
  if cursor then
    path = path .. "&after=" .. cursor
  end
  return wrk.format("GET", path, common.auth)
end
response = function(status, headers, body)
  if status ~= 200 then
    return
  end
  if body:find('"items":%[%]') then
    cursor = nil
    return
  end
  cursor = body:match('"nextCursor":"([^"]+)"') or cursor
end
