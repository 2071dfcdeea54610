-- The editor test of TestNeovim, run after init.lua with the module's
-- shop/shop.go open: diagnostics, the fix, the suppress code action.
-- Each step appends a line to $IDEM_NVIM_RESULT; a failure ends with
-- "FAIL: ..." and exit status 1.
local out = assert(io.open(vim.env.IDEM_NVIM_RESULT, "w"))
local function log(s)
  out:write(s .. "\n")
  out:flush()
end
local function fail(s)
  log("FAIL: " .. s)
  out:close()
  vim.cmd("cquit 1")
end

local buf = vim.api.nvim_get_current_buf()
local function wait(what, pred)
  local ok = vim.wait(60000, function()
    return pred(vim.diagnostic.get(buf))
  end, 20)
  if not ok then
    fail("no " .. what .. " after 60 s; diagnostics: " .. vim.inspect(vim.diagnostic.get(buf)))
  end
end
local function find(ds, code)
  for _, d in ipairs(ds) do
    if d.code == code then
      return d
    end
  end
end
local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return vim.split(s:gsub("\n$", ""), "\n", true)
end

local ok, err = pcall(function()
  -- The client counts once the server has answered initialize.
  local function clients()
    local n = 0
    for _ in pairs(vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = buf }) or vim.lsp.buf_get_clients(buf)) do
      n = n + 1
    end
    return n
  end
  vim.wait(30000, function() return clients() > 0 end, 20)
  if clients() ~= 1 then
    fail("init.lua attached " .. clients() .. " clients, want 1")
  end
  wait("txrpc diagnostic", function(ds) return find(ds, "txrpc") ~= nil end)
  local d = find(vim.diagnostic.get(buf), "txrpc")
  -- shop.go:19:12, the call notify(ctx, id); 0-based in Neovim.
  if d.lnum ~= 18 or d.col ~= 11 or d.end_col ~= 26 or d.source ~= "idemlint" or d.severity ~= vim.diagnostic.severity.WARN then
    fail("txrpc diagnostic " .. vim.inspect(d))
  end
  local rel = d.user_data.lsp.relatedInformation
  if #rel ~= 2 or rel[1].message ~= "transaction begun here" or rel[1].location.range.start.line ~= 10 then
    fail("related information " .. vim.inspect(rel))
  end
  if not d.message:match("^Network I/O while a database transaction is open\n") then
    fail("message " .. d.message)
  end
  log("ok: txrpc at line 19 with related information")

  -- The fix, by hand as a user makes it: commit before the call.
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, read(vim.env.IDEM_NVIM_GOOD))
  vim.cmd("write")
  wait("empty diagnostics after the fix", function(ds) return #ds == 0 end)
  log("ok: no diagnostics after the fix")

  -- Back to the bug, then the suppress code action.
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, read(vim.env.IDEM_NVIM_BAD))
  vim.cmd("write")
  wait("txrpc diagnostic again", function(ds) return find(ds, "txrpc") ~= nil end)
  local at = { line = 18, character = 11 }
  local params = { textDocument = { uri = vim.uri_from_bufnr(buf) }, range = { start = at, ["end"] = at }, context = { diagnostics = {} } }
  local results = vim.lsp.buf_request_sync(buf, "textDocument/codeAction", params, 60000) or {}
  local action, client_id
  for id, res in pairs(results) do
    for _, a in ipairs(res.result or {}) do
      if a.title == "suppress with //idemlint:ignore txrpc" then
        action, client_id = a, id
      end
    end
  end
  if not action then
    fail("no suppress action: " .. vim.inspect(results))
  end
  vim.lsp.util.apply_workspace_edit(action.edit, vim.lsp.get_client_by_id(client_id).offset_encoding)
  local line = vim.api.nvim_buf_get_lines(buf, 18, 19, false)[1]
  if line ~= "\t//idemlint:ignore txrpc TODO: say why this is safe" then
    fail("line 19 after the action: " .. line)
  end
  vim.cmd("write")
  wait("txrpc suppressed", function(ds)
    return find(ds, "txrpc") == nil and find(ds, "timeoutfail") ~= nil
  end)
  log("ok: suppressed by the code action")
end)
if not ok then
  fail(tostring(err))
end
out:close()
vim.cmd("qall!")
