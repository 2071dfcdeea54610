-- idemlint's language server for Go buffers, with Neovim's built-in LSP
-- client and no plugin (docs/idemlint.md, "In the editor"). Neovim 0.8+
-- has vim.lsp.start; 0.7 (Debian 12's) has vim.lsp.start_client.
-- $IDEMLINT names the binary when it is not "idemlint" on PATH.
local cmd = { vim.env.IDEMLINT or "idemlint", "lsp" }
local clients = {} -- module root -> client id, for Neovim 0.7
vim.api.nvim_create_autocmd("FileType", {
  pattern = "go",
  callback = function(args)
    local file = vim.api.nvim_buf_get_name(args.buf)
    local gomod = vim.fn.findfile("go.mod", vim.fn.fnamemodify(file, ":p:h") .. ";")
    if gomod == "" then
      return
    end
    local root = vim.fn.fnamemodify(gomod, ":p:h")
    local config = { name = "idemlint", cmd = cmd, root_dir = root }
    if vim.lsp.start then
      vim.lsp.start(config, { bufnr = args.buf })
    else
      clients[root] = clients[root] or vim.lsp.start_client(config)
      if clients[root] then -- nil when the binary could not be started
        vim.lsp.buf_attach_client(args.buf, clients[root])
      end
    end
  end,
})
