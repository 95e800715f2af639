// opencode custom tool (~/.config/opencode/tool/get_weather.ts): the tiny model's get_weather call
// runs here, and each call is appended to $PODKIT_E2E_CALLS as one JSON line.
import { tool } from "@opencode-ai/plugin"
import { appendFileSync } from "node:fs"

export default tool({
  description: "Get the current weather for a city.",
  args: {
    city: tool.schema.string().describe("City name"),
    unit: tool.schema.enum(["celsius", "fahrenheit"]).optional(),
  },
  async execute(args) {
    appendFileSync(process.env.PODKIT_E2E_CALLS!, JSON.stringify({ name: "get_weather", arguments: args }) + "\n")
    return JSON.stringify({ city: args.city, forecast: "sunny", temp: 21 })
  },
})
