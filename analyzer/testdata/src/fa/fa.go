package fa

import "fb"

func Charge() error { return fb.Send() } // want Charge:`netio\(fb\.Send -> fc\.Post -> \(\*http\.Client\)\.Do\)`

func Local() int { return fb.Double(2) }

func Run(db interface{}) error { return nil }
