-- GET of a certificate's public link (LINK), in the form ACCEPT asks for: no token, as a kennel's browser sends it.
local link = os.getenv("LINK")
local accept = os.getenv("ACCEPT") or "application/json"
request = function()
  return wrk.format("GET", link, {["Accept"] = accept})
end
